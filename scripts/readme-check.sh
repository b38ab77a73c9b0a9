#!/usr/bin/env bash
# Runs the console snippets of the README and the docs it links exactly as a reader pastes them,
# so that CI proves they run and answer what the docs show.
#
#   bash scripts/readme-check.sh local     the no-Docker setup: a fresh database, then the `local`
#                                          blocks in order (the README's start of anvil and the
#                                          API is the first of them)
#   bash scripts/readme-check.sh compose   the `compose` blocks, against a stack that is up and
#                                          fresh (scripts/compose-check.sh calls it)
#   bash scripts/readme-check.sh list      which blocks run in which mode; runs nothing
#
# How a doc marks its snippets (the line right before the fence):
#   <!-- runs: compose local -->  (or `compose`, or `local`) before a ```console block: each `$ `
#       line is a command (a line ending in `\` continues on the next), the lines up to the next
#       `$ ` are what it prints; `$ # …` lines are narration, neither run nor checked.
#   <!-- runs: none -->  before a ```console block that is not to be run.
#   <!-- file: DIR/NAME -->  before any fenced block: it is written to DIR/NAME (under the
#       repository) before the blocks after it run, as a reader saves it; DIR is removed at exit
#       if this run made it.
# A ```console block without a mark is an error, and so is a mark in a doc missing from DOCS
# below, so no snippet escapes the check by accident.
#
# Each block runs in one bash of its own, from the repository's root, with `set -e -o pipefail`;
# what each command prints is compared with what the doc shows after both are masked (ids,
# secrets, UUIDs, timestamps, Date and Content-Length, the rate limit's remaining count), with `…`
# in the doc standing for any text within a line, or for any lines when alone on its line. Output
# of a command sent to the background (`… &`) is not compared. Commands that open a browser
# (`xdg-open`) or start compose itself are not run. What blocks leave running (anvil, the API, a
# server) is stopped at exit, by process group. In compose mode `cast` is the chain container's,
# as the docs tell a compose reader to define it.
#
# Settings: API_PORT, CHAIN_PORT and CHAIN2_PORT (default 8080, 8545 and 8546): the docs say
# localhost:8080, 8545 and 8546, and the snippets, files and expected output are rewritten to
# these ports.
# PAYMENTS_API_BIN: local mode runs this binary where the docs say `make api-run` or
# `cargo run --`. TEST_DATABASE_URL: local mode's database server (default
# postgres://postgres@127.0.0.1:5432). COMPOSE_PROJECT_NAME: the project `docker compose exec`
# goes to. READMECHECK_TIMEOUT: seconds a block may take (default 600).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case $mode in
  compose | local | list) ;;
  *)
    echo "usage: bash scripts/readme-check.sh compose|local|list" >&2
    exit 2
    ;;
esac

api_port=${API_PORT:-8080}
chain_port=${CHAIN_PORT:-8545}
chain2_port=${CHAIN2_PORT:-8546}
fail() { echo "readme-check: $*" >&2; exit 1; }

scratch=$(mktemp -d)
database=
admin_url=
clean_up() {
  local pgid alive
  # Every block ran as a process group of its own; stop what is left of each (anvil, the API,
  # a server in the background), politely first.
  if [[ -s $scratch/pgids ]]; then
    while read -r pgid; do kill -TERM -- "-$pgid" 2>/dev/null || true; done <"$scratch/pgids"
    for _ in $(seq 1 40); do
      alive=0
      while read -r pgid; do kill -0 -- "-$pgid" 2>/dev/null && alive=1; done <"$scratch/pgids"
      ((alive)) || break
      sleep 0.25
    done
    while read -r pgid; do kill -KILL -- "-$pgid" 2>/dev/null || true; done <"$scratch/pgids"
  fi
  # Directories the docs' `file:` marks made, which did not exist before.
  if [[ -s $scratch/created ]]; then
    while read -r path; do rm -rf -- "$path"; done <"$scratch/created"
  fi
  if [[ -n $database ]]; then
    if command -v psql >/dev/null 2>&1; then
      psql "$admin_url" -X -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS \"$database\" WITH (FORCE)" >/dev/null 2>&1 ||
        echo "readme-check: could not drop the database $database" >&2
    else
      echo "readme-check: no psql here: the database $database is left on the server" >&2
    fi
  fi
  rm -rf "$scratch"
}
trap clean_up EXIT
trap 'exit 130' INT TERM

command -v python3 >/dev/null 2>&1 || fail "python3 is needed to read the docs"

if [[ $mode != list ]]; then
  command -v curl >/dev/null 2>&1 || fail "the snippets use curl, which is missing"
  if ! command -v jq >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || fail "the snippets use jq, which is missing"
    echo "readme-check: installing jq (apt)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null
    }
  fi
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
    fail "the x402 snippets use node and npm (Node.js 18+), which are missing"
fi

if [[ $mode == compose ]]; then
  curl -fsS "localhost:$api_port/readyz" >/dev/null 2>&1 ||
    fail "nothing ready on localhost:$api_port: bring the stack up first (docker compose up; API_PORT if it was moved)"
  if docker compose version >/dev/null 2>&1; then compose="docker compose"; else compose=docker-compose; fi
  export READMECHECK_COMPOSE=$compose
  # The docs tell a compose reader to run cast in the chain container
  # (`cast() { docker compose exec -T chain cast "$@"; }`); this is the same, as a command.
  mkdir -p "$scratch/bin"
  printf '#!/usr/bin/env bash\nexec %s exec -T chain cast "$@"\n' "$compose" >"$scratch/bin/cast"
  chmod +x "$scratch/bin/cast"
  export PATH=$scratch/bin:$PATH
fi

if [[ $mode == local ]]; then
  for port in "$api_port" "$chain_port" "$chain2_port"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      fail "port $port is taken: set API_PORT and CHAIN_PORT to free ones"
    fi
  done
  if [[ ! -x contracts/node_modules/.bin/anvil ]]; then
    echo "readme-check: installing the pinned chain tools (make chain-tools)" >&2
    make chain-tools >&2
  fi
  if [[ -n ${PAYMENTS_API_BIN:-} ]]; then
    [[ -x $PAYMENTS_API_BIN ]] || fail "PAYMENTS_API_BIN=$PAYMENTS_API_BIN is not an executable"
  fi
  # A database of its own on the test server, named after this shell, so that a run killed before
  # its clean-up leaves one that the next run recognises and drops.
  server=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
  database=readme_run$$_local
  read -r admin_url DATABASE_URL < <(python3 - "$server" "$database" <<'PY'
import sys
from urllib.parse import urlsplit, urlunsplit
url, name = sys.argv[1], sys.argv[2]
parts = urlsplit(url)
admin = urlunsplit(parts._replace(path="/postgres")) if parts.path in ("", "/") else url
print(admin, urlunsplit(parts._replace(path="/" + name)))
PY
  )
  export DATABASE_URL
  if command -v psql >/dev/null 2>&1; then
    psql "$admin_url" -X -q -t -A -c "SELECT datname FROM pg_database WHERE datname ~ '^readme_run[0-9]+_local$'" 2>/dev/null |
      while read -r name; do
        pid=${name#readme_run}
        kill -0 "${pid%_local}" 2>/dev/null ||
          psql "$admin_url" -X -q -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null 2>&1 || true
      done
  fi
  # What `make api-run` exports, for when the binary is run instead of make.
  export BOOTSTRAP_API_KEYS=${BOOTSTRAP_API_KEYS:-merchant-demo=merchant_demo,merchant-other=merchant_other}
  # `make chain-tools` put anvil and cast here; the README's start puts them on the PATH of the
  # reader's one shell, and each block here is a shell of its own.
  export PATH=$PWD/contracts/node_modules/.bin:$PATH
  # Moved ports: the docs' commands are rewritten, and these stand for the defaults the docs
  # rely on without naming them (cast's RPC URL, the API's listen address and public URL).
  if [[ $chain_port != 8545 ]]; then export ETH_RPC_URL=http://127.0.0.1:$chain_port; fi
  if [[ $api_port != 8080 ]]; then
    export BIND_ADDR=0.0.0.0:$api_port PUBLIC_BASE_URL=http://localhost:$api_port
  fi
fi

export READMECHECK_MODE=$mode READMECHECK_SCRATCH=$scratch READMECHECK_API_PORT=$api_port \
  READMECHECK_CHAIN_PORT=$chain_port READMECHECK_CHAIN2_PORT=$chain2_port
python3 - <<'PY'
import os
import re
import subprocess
import sys
import time
from pathlib import Path

# The docs whose snippets run, in the order a reader meets them: later blocks rely on what
# earlier ones did (the README starts the local stack; balances count the payments before).
DOCS = ["README.md", "docs/walkthrough.md", "docs/checkout.md", "docs/refunds.md",
        "docs/x402.md", "docs/api.md", "docs/orders.md"]
MODES = {"compose", "local", "none"}
# Not run: they open a browser or start what the mode expects to be up already.
NOT_RUN = ("xdg-open ", "open ", "docker compose up", "docker-compose up")

mode = os.environ["READMECHECK_MODE"]
scratch = Path(os.environ["READMECHECK_SCRATCH"])
api_port = os.environ["READMECHECK_API_PORT"]
chain_port = os.environ["READMECHECK_CHAIN_PORT"]
chain2_port = os.environ["READMECHECK_CHAIN2_PORT"]
timeout = int(os.environ.get("READMECHECK_TIMEOUT", "600"))
repo = Path.cwd()

MARK = re.compile(r"^\s*<!--\s*(runs|file):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)\s*([\w.+-]*)\s*$")


class DocError(Exception):
    pass


def parse(doc):
    """The doc's marked blocks, in order: ("file", path, text, where) and
    ("console", modes, lines, where)."""
    lines = (repo / doc).read_text().splitlines()
    items, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, info = fence.groups()
        where = f"{doc}:{i + 1}"
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            j += 1
        if j == len(lines):
            raise DocError(f"{where}: the fence is never closed")
        mark = MARK.match(lines[i - 1]) if i > 0 else None
        if mark and mark.group(1) == "file":
            if info == "console":
                raise DocError(f"{where}: a console block cannot be a file")
            path = mark.group(2)
            if path.startswith("/") or ".." in Path(path).parts or len(Path(path).parts) < 2:
                raise DocError(f"{where}: a file must be DIR/NAME under the repository, got {path}")
            items.append(("file", path, "\n".join(body) + "\n", where))
        elif info == "console":
            if not mark or mark.group(1) != "runs":
                raise DocError(f"{where}: a console block needs <!-- runs: compose|local|none --> on the line before")
            modes = set(mark.group(2).split())
            if not modes or not modes <= MODES or ("none" in modes and len(modes) > 1):
                raise DocError(f"{where}: unknown runs mark {mark.group(2)!r}")
            items.append(("console", modes, body, where))
        elif mark:
            raise DocError(f"{where}: a runs mark belongs before a console block, not {info or 'a plain'} block")
        i = j + 1
    return items


def commands(lines, where):
    """[(command, expected lines, line offset)] of a console block."""
    out, k = [], 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("$ ") or line == "$":
            text, first = line[2:], k
            while text.endswith("\\") and k + 1 < len(lines):
                k += 1
                text += "\n" + lines[k]
            out.append([text, [], first])
        elif out:
            out[-1][1].append(line)
        elif line.strip():
            raise DocError(f"{where}: output before the first `$ ` command")
        k += 1
    return out


def rewrite(text):
    """The docs' default ports, moved where API_PORT, CHAIN_PORT and CHAIN2_PORT say."""
    for host in ("localhost", "127.0.0.1"):
        text = text.replace(f"{host}:8080", f"{host}:{api_port}").replace(f"{host}:8545", f"{host}:{chain_port}")
        text = text.replace(f"{host}:8546", f"{host}:{chain2_port}")
    return text.replace("--port 8545", f"--port {chain_port}").replace("--port 8546", f"--port {chain2_port}")


def rewrite_command(text):
    text = rewrite(text)
    binary = os.environ.get("PAYMENTS_API_BIN")
    if mode == "local" and binary:
        # The binary `make test` built, instead of building it again.
        text = re.sub(r"\bmake api-run\b", '"$PAYMENTS_API_BIN" serve --migrate', text)
        text = re.sub(r"\bcargo run (?:-q )?--(?= |$)", '"$PAYMENTS_API_BIN"', text)
    if mode == "compose" and os.environ.get("READMECHECK_COMPOSE") == "docker-compose":
        text = re.sub(r"\bdocker compose\b", "docker-compose", text)
    return text


MASKS = [
    (re.compile(r"_secret_[0-9a-f]{32}"), "_secret_<secret>"),
    (re.compile(r"(?<![A-Za-z0-9_])([a-z]+)_[0-9a-f]{24}(?![0-9a-f])"), r"\1_<id>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"), "<time>"),
    (re.compile(r"^(date): .*$", re.I), r"\1: <date>"),
    (re.compile(r"^(content-length): \d+$", re.I), r"\1: <n>"),
    (re.compile(r";([rt])=\d+"), r";\1=<n>"),
]


def masked(line):
    line = line.rstrip()
    for pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    return line


def trimmed(lines):
    lines = [masked(line) for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def matches(expected, actual):
    """Whether the actual lines are what the doc shows, `…` being any text (alone: any lines)."""
    def line_matches(pattern, line):
        parts = [re.escape(part) for part in pattern.split("…")]
        return re.fullmatch(".*".join(parts), line) is not None

    memo = {}

    def at(e, a):
        if (e, a) not in memo:
            if e == len(expected):
                result = a == len(actual)
            elif expected[e].strip() == "…":
                result = any(at(e + 1, b) for b in range(a, len(actual) + 1))
            else:
                result = a < len(actual) and line_matches(expected[e], actual[a]) and at(e + 1, a + 1)
            memo[(e, a)] = result
        return memo[(e, a)]

    return at(0, 0)


def indented(text):
    return "".join(f"    {line}\n" for line in text.splitlines()) or "    (nothing)\n"


def run_block(number, modes, lines, where):
    todo = []
    for text, expected, offset in commands(lines, where):
        if text.lstrip().startswith("#"):
            continue
        if text.lstrip().startswith(NOT_RUN):
            print(f"readme-check:   not run: $ {text.splitlines()[0]}", flush=True)
            continue
        # Ends in a lone `&`, perhaps before a comment: sent to the background.
        background = re.search(r"(?<![&>])&\s*(#[^\n]*)?$", text.rstrip()) is not None
        todo.append((text, rewrite_command(text), [rewrite(e) for e in expected], offset, background))
    directory = scratch / f"block{number}"
    directory.mkdir()
    script = ["set -e -o pipefail", f"__dir='{directory}'",
              'trap \'__rc=$?; echo "$__n $__rc" > "$__dir/failed"\' ERR']
    for n, (_, command, _, _, _) in enumerate(todo, 1):
        script += [f"__n={n}", f'echo {n} > "$__dir/at"', "{", command, f'}} > "$__dir/{n}.out" 2>&1']
    (directory / "run.sh").write_text("\n".join(script) + "\n")

    started = time.monotonic()
    process = subprocess.Popen(["bash", str(directory / "run.sh")], cwd=repo,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    with open(scratch / "pgids", "a") as pgids:
        pgids.write(f"{process.pid}\n")
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, 15)
        process.wait()
    failed_n, failed_rc = None, None
    if (directory / "failed").exists():
        failed_n, failed_rc = map(int, (directory / "failed").read_text().split())
    elif timed_out:
        failed_n = int((directory / "at").read_text())
    elif process.returncode != 0:
        failed_n, failed_rc = 0, process.returncode

    def report(n, why, shown=True):
        text, _, expected, offset, _ = todo[n - 1]
        output = (directory / f"{n}.out").read_text(errors="replace") if (directory / f"{n}.out").exists() else ""
        doc, line = where.rsplit(":", 1)
        message = f"readme-check: FAIL {doc}:{int(line) + 1 + offset}, command {n} of the block at {where} ({why}):\n"
        message += indented("$ " + text)
        if shown:
            message += "  the doc shows:\n" + indented("\n".join(expected))
        message += "  it printed:\n" + indented(output)
        log = repo / "api.log"
        # The README's no-Docker start sends the API's log there: what it said is the likely cause.
        if log.exists() and log.stat().st_mtime >= run_started:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            message += "  the last lines of api.log:\n" + indented("\n".join(tail))
        sys.exit(message)

    last = failed_n if failed_n else len(todo)
    for n in range(1, last + 1):
        if failed_n == n:
            if timed_out:
                report(n, f"still running after {timeout} s", shown=False)
            report(n, f"exit status {failed_rc}", shown=False)
        text, _, expected, _, background = todo[n - 1]
        if background:
            continue
        actual = (directory / f"{n}.out").read_text(errors="replace").replace("\r", "").splitlines()
        if not matches(trimmed(expected), trimmed(actual)):
            report(n, "it printed something else")
    if failed_n == 0:
        sys.exit(f"readme-check: FAIL the block at {where}: bash exited {failed_rc} outside its commands")
    print(f"readme-check: ok   {where} ({len(todo)} commands, {time.monotonic() - started:.0f} s)", flush=True)


run_started = time.time()
try:
    listed = [(doc, parse(doc)) for doc in DOCS]
    for path in sorted(repo.glob("docs/**/*.md")):
        doc = str(path.relative_to(repo))
        if doc not in DOCS and re.search(r"<!--\s*(runs|file):", path.read_text()):
            raise DocError(f"{doc} marks snippets but is not among the docs this script runs (DOCS)")
    for doc, items in listed:
        for kind, what, body, where in items:
            if kind == "console":
                commands(body, where)
except DocError as e:
    sys.exit(f"readme-check: {e}")

if mode == "list":
    for doc, items in listed:
        for kind, what, body, where in items:
            if kind == "file":
                print(f"{where}  file {what}")
            else:
                print(f"{where}  runs: {' '.join(sorted(what))}  ({len(commands(body, where))} commands)")
    sys.exit(0)

number = 0
for doc, items in listed:
    for kind, what, body, where in items:
        if kind == "file":
            top = repo / Path(what).parts[0]
            if not top.exists():
                with open(scratch / "created", "a") as created:
                    created.write(f"{top}\n")
            target = repo / what
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(rewrite(body))
        elif mode in what:
            number += 1
            run_block(number, what, body, where)
print(f"readme-check: every {mode} snippet ran as the docs show ({number} blocks)")
PY
