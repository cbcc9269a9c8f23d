"""First set-up and checks of a setup: `python -m bot onboard` and `python -m bot doctor`."""
