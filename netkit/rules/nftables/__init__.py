"""The nftables backend: one `ip`/`ip6` table named netkit, verdict-map dispatch, no chain per endpoint.

names (object names) → layout, compile (NodeState → Ruleset) → render / parse (nft script, `nft -j` JSON) →
plan (smallest transaction) → kernel (nft -f or libnftables, the only IO) / fake (tests).
`backend` is the module object the commands use. Theory of operation: layout.py and docs/nftables.md.
"""
