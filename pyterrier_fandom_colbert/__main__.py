"""``python -m pyterrier_fandom_colbert`` is the ``pfc`` command (``pfc compare`` is ``pfc-compare``)."""
import sys

from .app.cli import main

sys.exit(main())
