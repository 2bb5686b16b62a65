"""`python -m deepdensity.report --from reports/`: the same as `deepdensity report`
(deepdensity/study/report.py): render a study's reports again from its study.json."""
import sys

from deepdensity.study.report import main

if __name__ == "__main__":
    sys.exit(main())
