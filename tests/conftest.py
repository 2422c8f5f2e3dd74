"""Suite-wide test settings."""

from hypothesis import settings

# Property tests check values, not speed: on a loaded 2-core CI machine one example can take
# longer than hypothesis's default 200 ms deadline, which would fail a correct test.
settings.register_profile("gpucontrol", deadline=None)
settings.load_profile("gpucontrol")
