// Compiles src/DevnetUSD.sol with the pinned solc into build/DevnetUSD.json (abi, bytecode),
// the artifact the Rust code embeds. Deterministic: same sources and compiler, same bytes.
// `node build.js --check` fails if the committed artifact differs from a fresh build.
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const root = __dirname;
const source = "src/DevnetUSD.sol";
const input = {
  language: "Solidity",
  sources: { [source]: { content: fs.readFileSync(path.join(root, source), "utf8") } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};

function findImports(name) {
  const file = path.join(root, "node_modules", name);
  return fs.existsSync(file) ? { contents: fs.readFileSync(file, "utf8") } : { error: `not found: ${name}` };
}

const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
if (errors.length) {
  errors.forEach((e) => console.error(e.formattedMessage));
  process.exit(1);
}
const contract = output.contracts[source].DevnetUSD;
const artifact = {
  contractName: "DevnetUSD",
  compiler: `solc ${solc.version()}`,
  abi: contract.abi,
  bytecode: "0x" + contract.evm.bytecode.object,
};
const text = JSON.stringify(artifact, null, 2) + "\n";
const target = path.join(root, "build", "DevnetUSD.json");

if (process.argv.includes("--check")) {
  const committed = fs.existsSync(target) ? fs.readFileSync(target, "utf8") : "";
  if (committed !== text) {
    console.error(`${path.relative(process.cwd(), target)} differs from a fresh build of ${source}: run \`make contracts\` and commit it`);
    process.exit(1);
  }
  console.log(`${target}: identical to a fresh build`);
} else {
  fs.mkdirSync(path.dirname(target), { recursive: true });
  fs.writeFileSync(target, text);
  console.log(`wrote ${target}`);
}
