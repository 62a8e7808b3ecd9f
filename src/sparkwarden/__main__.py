"""`python -m sparkwarden`: the same front door as the `sparkwarden` command."""

from sparkwarden.cli import main

raise SystemExit(main())
