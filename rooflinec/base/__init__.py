"""Plain values every stage shares: errors, located YAML, units, formulas, quantity formatting, shared names, time budgets."""
