"""`qexport demo`: the demo's data, queries, report and schedule, run end to end."""
