// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

/// One payment's deposit address. Whatever ERC-20 is sent here can only leave for `merchant`,
/// fixed at deployment and part of the address itself (CREATE2 over this code and the merchant):
/// no key, ours included, can send it anywhere else. Anyone may flush it.
contract DepositForwarder {
    using SafeERC20 for IERC20;

    address public immutable merchant;

    event Flushed(address indexed token, uint256 amount);

    constructor(address merchant_) {
        merchant = merchant_;
    }

    /// Sends this address's whole balance of `token` to the merchant. SafeERC20 takes tokens whose
    /// `transfer` returns nothing (Tether's on Ethereum) as well as those that return a bool.
    function flush(IERC20 token) external returns (uint256 amount) {
        amount = token.balanceOf(address(this));
        if (amount > 0) {
            token.safeTransfer(merchant, amount);
            emit Flushed(address(token), amount);
        }
    }
}

/// Where deposit addresses come from: the address of an intent's forwarder is computed from the
/// merchant, the token and the intent, and exists before anything is deployed. The first sweep
/// deploys it and flushes in one transaction; later ones call `flush` on it directly.
contract DepositForwarderFactory {
    event Deployed(address indexed forwarder, address indexed merchant, address indexed token, bytes32 intent);

    /// The CREATE2 salt of an intent's forwarder.
    function saltOf(address token, bytes32 intent) public pure returns (bytes32) {
        return keccak256(abi.encode(token, intent));
    }

    /// The forwarder's address, deployed or not.
    function forwarderOf(address merchant, address token, bytes32 intent) public view returns (address) {
        bytes32 initCodeHash = keccak256(abi.encodePacked(type(DepositForwarder).creationCode, abi.encode(merchant)));
        bytes32 hash = keccak256(abi.encodePacked(bytes1(0xff), address(this), saltOf(token, intent), initCodeHash));
        return address(uint160(uint256(hash)));
    }

    /// Deploys the intent's forwarder if it is not there yet, then flushes `flushed` (the intent's
    /// token, or another one sent to the address by mistake) to the merchant.
    function deployAndFlush(address merchant, address token, bytes32 intent, IERC20 flushed)
        external
        returns (address forwarder, uint256 amount)
    {
        forwarder = forwarderOf(merchant, token, intent);
        if (forwarder.code.length == 0) {
            new DepositForwarder{salt: saltOf(token, intent)}(merchant);
            emit Deployed(forwarder, merchant, token, intent);
        }
        amount = DepositForwarder(forwarder).flush(flushed);
    }
}
