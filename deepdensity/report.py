"""`python -m deepdensity.report --from reports/`: the same as `deepdensity report`
(deepdensity/study/rerender.py): render a study's reports again from its study.json."""

import sys

from deepdensity.study.rerender import main

if __name__ == "__main__":
    sys.exit(main())
