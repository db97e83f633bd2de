// An Express app limited per API key (per client address without one):
// 10 at once then 1 a second, and 100 a minute, checked together in one RL.ALL.
//   REDIS_PORT=6379 PORT=3000 node build/examples/express.js
import express from "express";
import { Redis } from "ioredis";
import { SlidingCounter, TokenBucket, apiKey, rateLimit } from "redis-ratelimit";

const redis = new Redis({ host: "127.0.0.1", port: Number(process.env.REDIS_PORT ?? 6379) });
const limiter = rateLimit({
  redis,
  key: apiKey("x-api-key"),
  limits: [new TokenBucket(10, 1), new SlidingCounter(100, "1m", { name: "per-minute" })],
});
await limiter.rule.validate(); // a limit the server refuses fails here, at start-up

const app = express();
app.use(limiter);
app.get("/hello", (_req, res) => {
  res.json({ hello: "world" });
});

const port = Number(process.env.PORT ?? 3000);
app.listen(port, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${port}`));
