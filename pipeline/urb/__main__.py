"""``python -m pipeline.urb dump FILE|-``: see :mod:`pipeline.urb.dump`."""

from .dump import main

raise SystemExit(main())
