"""nftables as values: one table of one family read, compared, written and watched, without kube-proxy in it.

Theory of operation. A table is a comparable value (`ruleset.Ruleset`: named sets and maps with
their elements, chains with their rules). Rules are kept as text in one canonical spelling, the one
`parse` prints back from the kernel, so a table built in Python and the same table read from the
kernel compare equal, and a planner compares strings; whatever must know what a rule *does* reads it
with `rule.read` (typed values that print back as the same text). A change is a `transaction.
Transaction`, written as an `nft -f` script (`transaction.render_transaction`) or, for the small
changes of a steady state, as one netfilter netlink batch that the kernel refuses unless the
ruleset generation is still the one read before (`netlink.encode`, `netlink.Writer`). Reading back
is the expensive part at 10,000 services, so there are three ways not to: the generation
(`generation.Generation`: nobody committed since), the fingerprint (`fingerprint.Reader`: somebody
committed, but this table dumps the same bytes over netlink), and only then a listing
(`parse_listing`: nft's text, half the time and memory of its JSON; `parse`: the JSON, which shows
everything, for whatever the text reader does not recognise).

Modules, by what they offer:

- `ruleset`: `Ruleset`, `Chain`, `Hook`, `NamedSet`, `Element` (and `Elements`, a set kept in
  chunks), `Part`/`Parts` (an optional index: what each contributor put in the table, so two
  tables compare part by part). Pure.
- `rule`: `read(text) -> Rule`, `readable(text) -> Rule | None`: the typed reader. Pure.
- `render`: `render(ruleset)` (the `nft -f` script that creates the table), `set_spec`, `hook_line`. Pure.
- `parse`: `parse(text, family, table) -> Ruleset | None` from `nft -j list table` JSON or from
  `render`'s script; rules it cannot read are kept as `# foreign: …` text. Pure.
- `parse_listing`: `parse_listing(lines)` from `nft -y -T list table`; `Unrecognised` for anything
  it does not read exactly (read the JSON instead). Pure.
- `transaction`: `Transaction` (with `prelude()`/`followup()`), `render_transaction`, `render_plan`. Pure.
- `netlink`: a Transaction as one NFNETLINK batch (`encode`; `Unsupported` for what it does not
  encode), `Writer` (sends it), the attribute codec. IO only in Writer.
- `generation`: the namespace's ruleset generation (`Generation`, `netfilter_socket`).
- `fingerprint`: `Reader.fingerprint(family, table)` over netlink and `account(fp, tx)` to keep a
  fingerprint up to date across one's own writes.
- `lookup`: whether a table or chain exists, by name over netlink.

This package imports nothing from netkit.rules (tests/unit/nft/test_library.py); the nftables
backend (netkit.rules.nftables: layout, compile, plan, kernel) and iptables mode's look-up of
iptables-nft's chains are its users. libnftables (python3-nftables) runs scripts and lists tables
for the backend's Kernel; it has no table model, netlink encoder or fingerprint to replace these
(docs/nftables.md).
"""
