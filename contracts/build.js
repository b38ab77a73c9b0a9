// Builds the contract artifacts the Rust code and the tests use, into build/:
//   1. src/DevnetUSD.sol, our devnet token, with the pinned solc 0.8.28 and OpenZeppelin 5.4.0,
//      into build/DevnetUSD.json (contractName, compiler, abi, bytecode); src/OwnedWallet.sol, the
//      ERC-1271 wallet the tests pay from, the same way into build/OwnedWallet.json; likewise
//      src/DepositForwarder.sol (deposit addresses: the forwarder and its CREATE2 factory) and
//      src/test/ (tokens that misbehave, for the tests).
//   2. Circle's USDC, vendored unmodified in vendor/stablecoin-evm/ (see its README.md), with the
//      pinned solc 0.6.12 (npm alias solc-0.6.12) and OpenZeppelin 3.4.2 (npm alias
//      @openzeppelin/contracts-3.4.2), into build/FiatTokenV2_2.json, build/SignatureChecker.json and
//      build/FiatTokenProxy.json (contractName, compiler, abi, bytecode, linkReferences). bytecode is
//      the creation bytecode; FiatTokenV2_2's is left unlinked: it holds the placeholder of the
//      external library SignatureChecker at the offsets its linkReferences give.
// Deterministic: same sources and compilers, same bytes.
// `node build.js --check` fails if any committed artifact differs from a fresh build.
const fs = require("fs");
const path = require("path");
const solc = require("solc");
const solc0612 = require("solc-0.6.12");

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

function failOnErrors(output) {
  const errors = (output.errors || []).filter((e) => e.severity === "error");
  if (errors.length) {
    errors.forEach((e) => console.error(e.formattedMessage));
    process.exit(1);
  }
}

const artifacts = []; // { target, text, from }

// Our own contracts, each compiled on its own with solc 0.8.28 and the settings above, so that
// the devnet token's artifact depends on nothing else: the token, and the smart-contract wallet
// the tests pay from (ERC-1271).
function buildOwn(source, name) {
  const own = { ...input, sources: { [source]: { content: fs.readFileSync(path.join(root, source), "utf8") } } };
  const output = JSON.parse(solc.compile(JSON.stringify(own), { import: findImports }));
  failOnErrors(output);
  const contract = output.contracts[source][name];
  const artifact = {
    contractName: name,
    compiler: `solc ${solc.version()}`,
    abi: contract.abi,
    bytecode: "0x" + contract.evm.bytecode.object,
  };
  artifacts.push({ target: path.join(root, "build", `${name}.json`), text: JSON.stringify(artifact, null, 2) + "\n", from: source });
}
buildOwn(source, "DevnetUSD");
buildOwn("src/OwnedWallet.sol", "OwnedWallet");
// Deposit addresses: the forwarder and the factory whose CREATE2 addresses they are.
buildOwn("src/DepositForwarder.sol", "DepositForwarder");
buildOwn("src/DepositForwarder.sol", "DepositForwarderFactory");
// Tokens that misbehave, for the tests: no return value (as USDT), a fee on transfer.
buildOwn("src/test/NoReturnToken.sol", "NoReturnToken");
buildOwn("src/test/FeeToken.sol", "FeeToken");

// Circle's FiatTokenV2_2 (USDC), its external library SignatureChecker and FiatTokenProxy.
// Source unit names are the paths in Circle's repository (contracts/...), so the library
// placeholder and link references are the same as in Circle's own builds; imports of
// @openzeppelin/contracts/... resolve to OpenZeppelin 3.4.2, the version Circle pins.
//
// Compiler settings, as Circle uses them at the vendored commit (see vendor/stablecoin-evm/README.md):
//   - solc 0.6.12: hardhat.config.ts `solidity.version`, package.json devDependencies `solc`, and the
//     `pragma solidity 0.6.12` of the sources;
//   - optimizer enabled, 10000000 runs: hardhat.config.ts `optimizer: { enabled: true, runs:
//     OPTIMIZER_RUNS || 10000000 }` (.env.example: "Defaults to 10000000") and foundry.toml
//     `optimizer_runs = 10000000`;
//   - evmVersion istanbul: neither config sets it, so it is solc 0.6.12's default; set here
//     explicitly (same bytecode), and it is what Circle's recorded build metadata
//     (test/scripts/hardhat/testData/FiatTokenProxy.metadata.json) says;
//   - metadata left at solc's defaults (bytecodeHash ipfs), as in Circle's configs.
const vendor = "vendor/stablecoin-evm";
const ozPrefix = "@openzeppelin/contracts/";
const circleContracts = [
  { source: "contracts/v2/FiatTokenV2_2.sol", name: "FiatTokenV2_2" },
  { source: "contracts/util/SignatureChecker.sol", name: "SignatureChecker" },
  { source: "contracts/v1/FiatTokenProxy.sol", name: "FiatTokenProxy" },
];

function findCircleImports(name) {
  let file;
  if (name.startsWith(ozPrefix)) {
    file = path.join(root, "node_modules", "@openzeppelin", "contracts-3.4.2", name.slice(ozPrefix.length));
  } else if (name.startsWith("contracts/")) {
    file = path.join(root, vendor, name);
  } else {
    return { error: `not found: ${name}` };
  }
  return fs.existsSync(file) ? { contents: fs.readFileSync(file, "utf8") } : { error: `not found: ${name}` };
}

// Objects with their keys sorted, recursively, so the JSON text does not depend on solc's key order.
function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys(value[k])]));
  }
  return value;
}

function vendoredSolidityFiles(dir, prefix = "") {
  return fs
    .readdirSync(path.join(dir, prefix), { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? vendoredSolidityFiles(dir, path.posix.join(prefix, e.name)) : e.name.endsWith(".sol") ? [path.posix.join(prefix, e.name)] : []))
    .sort();
}

const circleInput = {
  language: "Solidity",
  sources: Object.fromEntries(
    circleContracts.map((c) => [c.source, { content: fs.readFileSync(path.join(root, vendor, c.source), "utf8") }]),
  ),
  settings: {
    optimizer: { enabled: true, runs: 10000000 },
    evmVersion: "istanbul",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.bytecode.linkReferences"] } },
  },
};
const circleOutput = JSON.parse(solc0612.compile(JSON.stringify(circleInput), { import: findCircleImports }));
failOnErrors(circleOutput);

// The vendored directory holds exactly the sources these contracts need: no more, no fewer.
const used = Object.keys(circleOutput.sources).filter((s) => !s.startsWith(ozPrefix)).sort();
const vendored = vendoredSolidityFiles(path.join(root, vendor));
if (JSON.stringify(used) !== JSON.stringify(vendored)) {
  console.error(`${vendor} does not hold exactly the sources the build uses:`);
  console.error(`  used but not vendored: ${used.filter((s) => !vendored.includes(s)).join(", ") || "-"}`);
  console.error(`  vendored but unused: ${vendored.filter((s) => !used.includes(s)).join(", ") || "-"}`);
  process.exit(1);
}

for (const c of circleContracts) {
  const compiled = circleOutput.contracts[c.source][c.name];
  const circleArtifact = {
    contractName: c.name,
    compiler: `solc ${solc0612.version()}`,
    abi: compiled.abi,
    bytecode: "0x" + compiled.evm.bytecode.object,
    linkReferences: sortKeys(compiled.evm.bytecode.linkReferences || {}),
  };
  artifacts.push({
    target: path.join(root, "build", `${c.name}.json`),
    text: JSON.stringify(circleArtifact, null, 2) + "\n",
    from: path.posix.join(vendor, c.source),
  });
}

if (process.argv.includes("--check")) {
  let stale = false;
  for (const { target, text, from } of artifacts) {
    const committed = fs.existsSync(target) ? fs.readFileSync(target, "utf8") : "";
    if (committed !== text) {
      console.error(`${path.relative(process.cwd(), target)} differs from a fresh build of ${from}: run \`make contracts\` and commit it`);
      stale = true;
    } else {
      console.log(`${target}: identical to a fresh build`);
    }
  }
  if (stale) process.exit(1);
} else {
  for (const { target, text } of artifacts) {
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.writeFileSync(target, text);
    console.log(`wrote ${target}`);
  }
}
