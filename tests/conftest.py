import os

from hypothesis import settings

from conformance.profiles import register

register()
# the project's tests default to the "ci" profile; --hypothesis-profile or HYPOTHESIS_PROFILE override it
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
