// Signs EIP-712 typed data the way wallets do, with two widely used implementations that are not
// ours: viem (as in wagmi-based dapps) and ethers 6 (as in MetaMask-era tooling), pinned in
// package.json. The tests compare their digests with the one the API answers, and pay with their
// signatures.
//
// stdin: {"typed_data": <the document GET …/authorization answers>, "private_key": "0x…"}
// stdout: {"viem": {"digest", "signature"}, "ethers": {"digest", "signature"}}
import { readFileSync } from "node:fs";
import { hashTypedData } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { TypedDataEncoder, Wallet } from "ethers";

const { typed_data: typed, private_key: key } = JSON.parse(readFileSync(0, "utf8"));
const { EIP712Domain, ...types } = typed.types;
void EIP712Domain; // both libraries derive the domain's type from the domain itself

// viem wants integers as bigint; the document writes amounts and times as decimal strings.
const integers = (fields, values) =>
  Object.fromEntries(
    Object.entries(values).map(([name, value]) => {
      const field = fields.find((f) => f.name === name);
      return [name, field && /^u?int\d*$/.test(field.type) ? BigInt(value) : value];
    }),
  );
const message = integers(types[typed.primaryType], typed.message);
const request = { domain: typed.domain, types, primaryType: typed.primaryType, message };

const account = privateKeyToAccount(key);
const wallet = new Wallet(key);
const out = {
  viem: {
    digest: hashTypedData(request),
    signature: await account.signTypedData(request),
  },
  ethers: {
    digest: TypedDataEncoder.hash(typed.domain, types, typed.message),
    signature: await wallet.signTypedData(typed.domain, types, typed.message),
  },
};
process.stdout.write(JSON.stringify(out) + "\n");
