// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// A token for the tests that keeps a fee of 1% of every transfer: what arrives is less than what
/// was sent, and the receiver's balance, not the amount sent, is what was paid.
contract FeeToken is ERC20 {
    constructor(address[] memory holders, uint256 each) ERC20("Fee USD", "FUSD") {
        for (uint256 i = 0; i < holders.length; i++) {
            _mint(holders[i], each);
        }
    }

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function _update(address from, address to, uint256 value) internal override {
        if (from == address(0) || to == address(0)) {
            return super._update(from, to, value);
        }
        uint256 fee = value / 100;
        super._update(from, address(0), fee);
        super._update(from, to, value - fee);
    }
}
