// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC721} from "@openzeppelin/contracts/token/ERC721/ERC721.sol";

/// An NFT for the tests (OpenZeppelin's ERC-721): its `Transfer` has an ERC-20's topic 0 and a
/// fourth topic, the token id, where an ERC-20 has its value in the data. The constructor takes
/// the test tokens' arguments: holder `i` gets the one token numbered `first + i`.
contract TestNFT is ERC721 {
    constructor(address[] memory holders, uint256 first) ERC721("Test NFT", "TNFT") {
        for (uint256 i = 0; i < holders.length; i++) {
            _mint(holders[i], first + i);
        }
    }
}
