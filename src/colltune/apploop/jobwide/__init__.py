"""The job-wide search: tune runtime's screening and confirmation of runtime parameters
(runtime_search), its objectives (objective), and tune compare's libraries side by side
(compare)."""
