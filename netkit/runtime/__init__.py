"""The node daemon: one asyncio process with sources, a bounded-frequency sync runner, the syncer
(compile → plan → apply → conntrack cleanup), health and metrics servers, and optionally cluster DNS.
Constructors do no IO; `run()` starts work."""
