"""What colltune hands over beyond a tuning run's file: site/user exports with their
environment modules, and batch scripts."""
