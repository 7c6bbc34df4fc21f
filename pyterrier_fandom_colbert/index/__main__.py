"""``python -m pyterrier_fandom_colbert.index build-ann FOLDER``: the older name of ``pfc build-ann``
(:mod:`.build_ann`)."""
import sys

from .build_ann import main

sys.exit(main())
