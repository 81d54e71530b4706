// The study page's trial filter, shared by every view: one object from trial field to condition,
// the server's `filter` query parameter (service/trial_fields.py), e.g.
// {"params.lr": {"min": 0.001, "max": 0.1}, "state": {"in": ["completed"]}}.
// Brushing the parallel coordinates and the table's filter inputs set it; the views that read
// trials pass filterQuery() to the server and redraw on onFilterChange.

const conditions = new Map();
const listeners = [];

// The filter as the `filter` query parameter, or undefined when nothing is filtered.
export function filterQuery() {
  return conditions.size ? JSON.stringify(Object.fromEntries(conditions)) : undefined;
}

export function filterConditions() {
  return new Map(conditions);
}

// Sets one field's condition, or clears it with null; listeners run once per change.
export function setCondition(field, condition) {
  const before = filterQuery();
  if (condition) conditions.set(field, condition);
  else conditions.delete(field);
  if (filterQuery() !== before) for (const listener of listeners) listener();
}

export function clearFilter() {
  if (!conditions.size) return;
  conditions.clear();
  for (const listener of listeners) listener();
}

export function onFilterChange(listener) {
  listeners.push(listener);
}
