"""Suite-wide test settings.

hypothesis times each example (200 ms by default) and fails slow ones; that is a timed
assertion, and CI's two cores are shared, so no example is timed anywhere in the suite.
"""

from hypothesis import settings

settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")
