"""Its import never finishes in reasonable time, as one waiting on a network drive or a lock would."""

import time

time.sleep(3600)
