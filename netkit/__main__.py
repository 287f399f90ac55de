import sys

try:
    from netkit.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python is still importing: the same one line as later
    print("netkit: error: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
