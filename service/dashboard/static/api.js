// The dashboard's only way to the server: the public JSON API under /v1.

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? `${status} ${problem.code}: ${problem.detail}` : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export async function getJson(path, query = {}) {
  const url = new URL(path, window.location.origin);
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// Calls onChange(study) now and whenever the study changes (its revision moves); after an
// error (onError), the next successful poll calls onChange again.
// Today it polls every second; when GET /v1/studies/{id}/events (server-sent events) exists,
// only this function changes. Returns a function that stops the subscription.
export function subscribe(studyId, onChange, onError = console.warn) {
  let revision = null;
  let stopped = false;
  let timer = null;
  async function poll() {
    try {
      const study = await getJson(`/v1/studies/${studyId}`);
      if (!stopped && study.revision !== revision) {
        revision = study.revision;
        await onChange(study);
      }
    } catch (error) {
      revision = null;
      onError(error);
    }
    if (!stopped) timer = setTimeout(poll, 1000);
  }
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
