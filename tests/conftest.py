import os

from conformance.profiles import register

register()

from hypothesis import settings  # noqa: E402

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
