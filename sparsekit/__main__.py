"""``python -m sparsekit ...``: the ``sparsekit`` command (:func:`sparsekit.cli.main`) without its console script."""
from sparsekit.cli import main

raise SystemExit(main())
