// The dashboard's writes: the same public API as any worker (PATCH a study, enqueue, tell),
// their problem+json errors shown next to the control that sent them.
import { ApiError } from "./api.js";

export async function sendJson(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, answer);
  return answer;
}

// Runs `action` and shows its error, or nothing, in `node`.
export async function reporting(node, action) {
  node.textContent = "";
  node.hidden = true;
  try {
    return await action();
  } catch (error) {
    node.textContent = String(error.message || error);
    node.hidden = false;
    return null;
  }
}
