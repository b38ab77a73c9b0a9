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
// Tokens that misbehave or differ, for the tests: no return value (as USDT), a fee on transfer.
buildOwn("src/test/NoReturnToken.sol", "NoReturnToken");
buildOwn("src/test/FeeToken.sol", "FeeToken");
// EIP-2612's permit without EIP-3009: paid by Permit2, approved by signature.
buildOwn("src/test/PermitToken.sol", "PermitToken");
// An ERC-721, whose `Transfer` shares the ERC-20's topic 0: the deposit watch passes it over.
buildOwn("src/test/TestNFT.sol", "TestNFT");

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

// Permit2 and x402's Permit2 proxies: contracts that live at one address on every chain, placed
// on a devnet by `anvil_setCode` at that address (src/rails/evm/permit2.rs). So the artifacts
// hold the runtime code and where its immutables are (the devnet writes them: Permit2's cached
// chain id and domain separator, the proxies' Permit2 address), not creation code.
//
// Permit2 (Uniswap/permit2, vendor/permit2/README.md), as its foundry.toml builds it: solc 0.8.17,
// via IR, optimizer 1000000 runs, bytecode hash none, evmVersion left at 0.8.17's default
// (london, set here explicitly), solmate through the remapping solmate/=lib/solmate/.
// x402's proxies (vendor/x402/README.md), as x402's contracts/evm/foundry.toml: solc 0.8.28,
// optimizer 200 runs, no CBOR metadata, evmVersion cancun, OpenZeppelin 5.5.0 (its lib/ submodule).
const solc0817 = require("solc-0.8.17");

function buildPlaced({ compiler, dir, sources, settings, remap, contracts }) {
  const compileInput = {
    language: "Solidity",
    sources: Object.fromEntries(sources.map((s) => [s, { content: fs.readFileSync(path.join(root, dir, s), "utf8") }])),
    settings: {
      ...settings,
      outputSelection: { "*": { "": ["ast"], "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object", "evm.deployedBytecode.immutableReferences"] } },
    },
  };
  const findImports = (name) => {
    for (const [prefix, to] of remap) {
      if (name.startsWith(prefix)) {
        const file = path.join(to, name.slice(prefix.length));
        return fs.existsSync(file) ? { contents: fs.readFileSync(file, "utf8") } : { error: `not found: ${name}` };
      }
    }
    const file = path.join(root, dir, name);
    return fs.existsSync(file) ? { contents: fs.readFileSync(file, "utf8") } : { error: `not found: ${name}` };
  };
  const output = JSON.parse(compiler.compile(JSON.stringify(compileInput), { import: findImports }));
  failOnErrors(output);
  // The vendored directory holds exactly the sources the build uses.
  const inDir = path.join(root, dir) + path.sep;
  const used = Object.keys(output.sources)
    .map((unit) => {
      const remapped = remap.find(([prefix]) => unit.startsWith(prefix));
      return remapped ? path.join(remapped[1], unit.slice(remapped[0].length)) : path.join(inDir, unit);
    })
    .filter((file) => file.startsWith(inDir))
    .map((file) => file.slice(inDir.length).split(path.sep).join("/"))
    .sort();
  const vendored = vendoredSolidityFiles(path.join(root, dir));
  if (JSON.stringify(used) !== JSON.stringify(vendored)) {
    console.error(`${dir} does not hold exactly the sources the build uses:`);
    console.error(`  used but not vendored: ${used.filter((s) => !vendored.includes(s)).join(", ") || "-"}`);
    console.error(`  vendored but unused: ${vendored.filter((s) => !used.includes(s)).join(", ") || "-"}`);
    process.exit(1);
  }
  const built = {};
  for (const { source, name } of contracts) {
    const compiled = output.contracts[source][name];
    // Each immutable by the name of its variable in the source, not solc's AST id.
    const names = Object.fromEntries(
      Object.values(output.sources).flatMap((unit) => immutablesOf(unit.ast)).map((v) => [String(v.id), v.name]),
    );
    const immutables = Object.fromEntries(
      Object.entries(compiled.evm.deployedBytecode.immutableReferences || {}).map(([id, refs]) => [names[id], refs]),
    );
    const artifact = {
      contractName: name,
      compiler: `solc ${compiler.version()}`,
      abi: compiled.abi,
      bytecode: "0x" + compiled.evm.bytecode.object,
      deployedBytecode: "0x" + compiled.evm.deployedBytecode.object,
      immutableReferences: sortKeys(immutables),
    };
    built[name] = artifact;
    artifacts.push({ target: path.join(root, "build", `${name}.json`), text: JSON.stringify(artifact, null, 2) + "\n", from: path.posix.join(dir, source) });
  }
  return built;
}

// The immutable state variables declared in a source unit's AST.
function immutablesOf(node) {
  if (!node || typeof node !== "object") return [];
  const own = node.nodeType === "VariableDeclaration" && node.mutability === "immutable" ? [node] : [];
  return own.concat(Object.values(node).flatMap((child) => (Array.isArray(child) ? child.flatMap(immutablesOf) : immutablesOf(child))));
}

buildPlaced({
  compiler: solc0817,
  dir: "vendor/permit2",
  sources: ["src/Permit2.sol"],
  settings: { viaIR: true, optimizer: { enabled: true, runs: 1000000 }, evmVersion: "london", metadata: { bytecodeHash: "none" } },
  remap: [["solmate/", path.join(root, "vendor/permit2/lib/solmate/")]],
  contracts: [{ source: "src/Permit2.sol", name: "Permit2" }],
});
const proxies = buildPlaced({
  compiler: solc,
  dir: "vendor/x402",
  sources: ["src/x402ExactPermit2Proxy.sol", "src/x402UptoPermit2Proxy.sol"],
  settings: { optimizer: { enabled: true, runs: 200 }, evmVersion: "cancun", metadata: { appendCBOR: false, bytecodeHash: "none" } },
  remap: [["@openzeppelin/contracts/", path.join(root, "node_modules/@openzeppelin/contracts-5.5.0/")]],
  contracts: [
    { source: "src/x402ExactPermit2Proxy.sol", name: "x402ExactPermit2Proxy" },
    { source: "src/x402UptoPermit2Proxy.sol", name: "x402UptoPermit2Proxy" },
  ],
});
// The upto proxy's creation code with its constructor argument (Permit2's address) is the one x402
// deployed: its hash is the one x402's vanity miner (contracts/evm/vanity-miner) mined the salt of
// 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002 for. A build that differs is not x402's contract.
{
  const { keccak256 } = require("viem");
  const permit2Argument = "000000000000000000000000000000000022d473030f116ddee9f6b43ac78ba3";
  const initCodeHash = keccak256(proxies.x402UptoPermit2Proxy.bytecode + permit2Argument);
  const deployed = "0x74f7a29cbc3c55f87cdef7f7c551643189e8bb62eed9de67753aebc402b83797";
  if (initCodeHash !== deployed) {
    console.error(`x402UptoPermit2Proxy's creation code hashes to ${initCodeHash}, not x402's ${deployed}`);
    process.exit(1);
  }
}

// Coinbase Smart Wallet v1.1 and its factory (vendor/smart-wallet/README.md): the public ERC-4337
// wallet whose undeployed accounts sign with ERC-6492, for the x402 suite's counterfactual payer.
// Built as its foundry.toml's deploy profile: solc 0.8.23, via IR, optimizer 999999 runs; its
// evm_version "prague" is above what 0.8.23 knows, and foundry lowers it to the compiler's
// newest, shanghai, set here explicitly. solady from npm (see the README), OpenZeppelin 5.4.0's
// Base64 for webauthn-sol. The factory is placed at viem's address for version 1.1 with its
// `implementation` immutable written; the wallet is deployed from its creation code.
buildPlaced({
  compiler: require("solc-0.8.23"),
  dir: "vendor/smart-wallet",
  sources: ["src/CoinbaseSmartWalletFactory.sol"],
  settings: { viaIR: true, optimizer: { enabled: true, runs: 999999 }, evmVersion: "shanghai" },
  remap: [
    ["account-abstraction/", path.join(root, "vendor/smart-wallet/lib/account-abstraction/contracts/")],
    ["webauthn-sol/", path.join(root, "vendor/smart-wallet/lib/webauthn-sol/src/")],
    ["FreshCryptoLib/", path.join(root, "vendor/smart-wallet/lib/FreshCryptoLib/solidity/src/")],
    ["openzeppelin-contracts/contracts/", path.join(root, "node_modules/@openzeppelin/contracts/")],
    ["solady/", path.join(root, "node_modules/solady/src/")],
  ],
  contracts: [
    { source: "src/CoinbaseSmartWallet.sol", name: "CoinbaseSmartWallet" },
    { source: "src/CoinbaseSmartWalletFactory.sol", name: "CoinbaseSmartWalletFactory" },
  ],
});

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
