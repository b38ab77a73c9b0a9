// An HTTP proxy between a client and the API that fails the way networks and load balancers do:
// it forwards a request and then resets the connection once the server's answer arrived (the
// server committed, the client never hears of it), holds an answer past the client's timeout,
// or answers 502 itself. `plan(request)` picks each request's fate; `seen` records every request.
import http from "node:http";

export const FATES = ["pass", "reset", "hold", "bad_gateway"];

/// `choose(request, index)` answers a fate, or `{ status, headers, body }` to answer without
/// forwarding (a proxy's or a balancer's own answer).
export async function startFaultProxy(target, { choose = () => "pass", holdMs = 1000 } = {}) {
  const upstream = new URL(target);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const counts = Object.fromEntries(FATES.map((fate) => [fate, 0]));
  counts.answered = 0;
  const seen = [];
  const timers = new Set();
  const later = (ms, fn) => {
    const timer = setTimeout(() => (timers.delete(timer), fn()), ms);
    timers.add(timer);
  };

  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const request = { method: req.method, url: req.url, headers: { ...req.headers }, body: body.toString() };
    const index = seen.push(request) - 1;
    const fate = proxy.choose(request, index);
    if (typeof fate === "object") {
      counts.answered++;
      res.writeHead(fate.status, fate.headers ?? {}).end(fate.body ?? "");
      return;
    }
    counts[fate]++;
    if (fate === "bad_gateway") {
      res.writeHead(502, { "content-type": "text/html" }).end("<html><body><h1>502 Bad Gateway</h1></body></html>");
      return;
    }
    const headers = { ...req.headers, host: upstream.host };
    const forwarded = http.request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers, agent },
      async (answer) => {
        const parts = [];
        for await (const part of answer) parts.push(part);
        const payload = Buffer.concat(parts);
        if (fate === "reset") {
          // The server has answered (and so committed); the client gets a reset instead.
          req.socket.resetAndDestroy();
          return;
        }
        const send = () => {
          if (res.destroyed || req.socket.destroyed) return;
          const out = { ...answer.headers };
          delete out["transfer-encoding"];
          out["content-length"] = String(payload.length);
          res.writeHead(answer.statusCode, out).end(payload);
        };
        // Held past the client's timeout: the client has given up by the time this is due.
        if (fate === "hold") later(holdMs, () => req.socket.destroy());
        else send();
      },
    );
    forwarded.on("error", () => req.socket.destroy());
    forwarded.end(body);
  });
  server.keepAliveTimeout = 5000;
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const proxy = {
    url: `http://127.0.0.1:${server.address().port}`,
    counts,
    seen,
    choose,
    close: async () => {
      for (const timer of timers) clearTimeout(timer);
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      agent.destroy();
    },
  };
  return proxy;
}

/// The fault mix of the issue: a tenth reset after the answer, some held past the timeout, some
/// answered 502, the rest passed.
export function faultMix({ reset = 0.1, hold = 0.05, badGateway = 0.05 } = {}) {
  return () => {
    const roll = Math.random();
    if (roll < reset) return "reset";
    if (roll < reset + hold) return "hold";
    if (roll < reset + hold + badGateway) return "bad_gateway";
    return "pass";
  };
}
