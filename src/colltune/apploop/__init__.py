"""The application loop: a real application's own collectives, tuned where it calls them.
Four folders, each a stage a user runs: `profiling/` (tune profile: what the application
calls, where its ranks ran and how far apart they entered; the profile's schema; the
replay of its arrival), `app/` (tune app and tune verify --app: the loop proper),
`online/` (tune online: tuning inside the application's run, with kernel/online/'s layer),
`jobwide/` (tune runtime and tune compare: job-wide parameters and libraries side by side).
Imports run profiling <- online, jobwide <- app (tests/test_architecture.py)."""
