"""``python -m pyterrier_fandom_colbert.app`` is the ``pfc`` command."""
import sys

from .cli import main

sys.exit(main())
