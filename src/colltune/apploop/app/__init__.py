"""The application loop proper: tune app (tune_app: each group the profile names, tuned in
the layout it ran in) and tune verify --app (verify_app: the application's own wall time
with the file against without)."""
