"""Rule compilers, one package per backend (iptables, nftables, ipvs).

Every backend has the same shape (see `netkit.rules.backend.Backend`): a pure `compile(state, config)`
to a structured Ruleset, `render`/`parse` between the Ruleset and the kernel's text, a pure
`plan(committed, desired)` that holds every optimisation, and a thin `Kernel` that dumps and applies,
optionally inside a named network namespace. Only the Kernel does IO.
"""
