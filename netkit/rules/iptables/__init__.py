"""The iptables backend: kube-proxy's layout (names.py), compile → Ruleset (compile.py, ruleset.py),
plan against what the kernel holds (plan.py), and the kernel edge (kernel.py: iptables-save/restore,
legacy or nft, optionally inside a network namespace)."""
