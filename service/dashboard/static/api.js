// The dashboard's only way to the server: the public JSON API under /v1.

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? `${status} ${problem.code}: ${problem.detail}` : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// A server that needs API keys: the dashboard asks for one at its first 401 and keeps it for the
// browser tab (sessionStorage), sent as the Bearer header, and as ?access_token= on the event
// stream (EventSource cannot send headers).
const KEY_ITEM = "asktell-api-key";
let asking = null;

function withKey(init) {
  const key = sessionStorage.getItem(KEY_ITEM);
  if (!key) return init;
  return { ...init, headers: { ...init.headers, Authorization: `Bearer ${key}` } };
}

// Asks once for every request that got a 401 at the same time.
function askForKey() {
  asking ??= Promise.resolve().then(() => {
    const key = window.prompt("This server needs an API key (asktell keys create --scope read):");
    if (key && key.trim()) sessionStorage.setItem(KEY_ITEM, key.trim());
    asking = null;
    return Boolean(key && key.trim());
  });
  return asking;
}

async function authorizedFetch(url, init) {
  const response = await fetch(url, withKey(init));
  if (response.status !== 401 || !(await askForKey())) return response;
  return fetch(url, withKey(init));
}

function eventsUrl(path) {
  const url = new URL(path, window.location.origin);
  const key = sessionStorage.getItem(KEY_ITEM);
  if (key) url.searchParams.set("access_token", key);
  return url;
}

export async function getJson(path, query = {}) {
  const url = new URL(path, window.location.origin);
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const response = await authorizedFetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// The kinds of event of GET /v1/studies/{id}/events (server-sent events).
const STUDY_EVENTS = ["trial_asked", "trial_told", "trial_failed", "study_state"];
// Changes that send no event (an enqueued point, new metadata) and retries after an error.
const FALLBACK_POLL_MS = 5000;
// A busy study sends events without pause: at most two refreshes a second.
const MIN_REFRESH_MS = 500;

// Calls onChange(study) now and whenever the study changes (its revision moves): at once on
// each event of the study's event stream, and at least every few seconds. Refreshes never
// overlap: events during one are answered by one more, half a second after it began. After
// an error (onError), the next refresh calls onChange again. Returns a function that stops
// the subscription.
export function subscribe(studyId, onChange, onError = console.warn) {
  let revision = null;
  let stopped = false;
  let running = false;
  let pending = false;

  async function refresh() {
    if (running) {
      pending = true;
      return;
    }
    running = true;
    let started = 0;
    do {
      const wait = started + MIN_REFRESH_MS - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      started = Date.now();
      pending = false;
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
    } while (pending && !stopped);
    running = false;
  }

  // EventSource reconnects by itself, resuming with Last-Event-ID. It opens after the first
  // refresh, which asks for a key when the server needs one.
  let events = null;
  const timer = setInterval(refresh, FALLBACK_POLL_MS);
  refresh().then(() => {
    if (stopped) return;
    events = new EventSource(eventsUrl(`/v1/studies/${studyId}/events`));
    for (const kind of STUDY_EVENTS) events.addEventListener(kind, refresh);
  });
  return () => {
    stopped = true;
    if (events) events.close();
    clearInterval(timer);
  };
}

// The dashboard's writes (its controls): the same public API calls as any worker's.
export async function sendJson(method, path, body) {
  const response = await authorizedFetch(path, {
    method,
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, answer);
  return answer;
}
