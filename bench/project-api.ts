/** One call to a project's API (`/api/projects/main/...`) as the benchmarks make it: JSON in, the answer's status and text out. */
export async function projectApi(baseUrl: string, token: string, method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const response = await fetch(`${baseUrl}/api/projects/main${path}`, {
    method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}
