// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

/// A token for the tests with EIP-2612's `permit` and no EIP-3009, as many ERC-20s are: a wallet
/// pays it by Permit2, and lets Permit2 move it by a signed permit instead of a transaction.
contract PermitToken is ERC20, ERC20Permit {
    constructor(address[] memory holders, uint256 each) ERC20("Permit USD", "PUSD") ERC20Permit("Permit USD") {
        for (uint256 i = 0; i < holders.length; i++) {
            _mint(holders[i], each);
        }
    }

    function decimals() public pure override returns (uint8) {
        return 6;
    }
}
