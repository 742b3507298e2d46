"""The drafter of a recorded run, live: export a bundle from the warehouse (bundle.py), load it and
propose drafts in a decoding loop (drafter.py), and replay a run's eval traces through it to show
it is the drafter the warehouse measured (replay.py). Reads the warehouse's tables and recorded
runs; nothing earlier imports it."""
