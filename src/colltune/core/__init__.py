"""Types every layer shares (configurations, catalogs, results, verdicts, decisions):
they import nothing above them, so backends, the store, models and the tuner can all use
them without importing each other."""
