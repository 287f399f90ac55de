from netkit.cli import main

raise SystemExit(main())
