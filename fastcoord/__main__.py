"""`python -m fastcoord` is `fastcoord`."""

from fastcoord.cli import main

raise SystemExit(main())
