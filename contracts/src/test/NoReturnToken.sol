// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// A token for the tests that behaves as Tether's USDT does on Ethereum: `transfer`,
/// `transferFrom` and `approve` return nothing (its verified source is Solidity 0.4, which no
/// pinned compiler of ours builds), and a failed transfer reverts.
contract NoReturnToken {
    string public constant name = "No-return USD";
    string public constant symbol = "NRUSD";
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor(address[] memory holders, uint256 each) {
        for (uint256 i = 0; i < holders.length; i++) {
            balanceOf[holders[i]] = each;
            totalSupply += each;
            emit Transfer(address(0), holders[i], each);
        }
    }

    function transfer(address to, uint256 value) external {
        _move(msg.sender, to, value);
    }

    function transferFrom(address from, address to, uint256 value) external {
        require(allowance[from][msg.sender] >= value, "allowance");
        allowance[from][msg.sender] -= value;
        _move(from, to, value);
    }

    function approve(address spender, uint256 value) external {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
    }

    function _move(address from, address to, uint256 value) private {
        require(balanceOf[from] >= value, "balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
