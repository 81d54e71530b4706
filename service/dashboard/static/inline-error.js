// A control's problem+json error shown next to it rather than at the top of the page.

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
