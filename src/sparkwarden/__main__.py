from sparkwarden.cli import main

raise SystemExit(main())
