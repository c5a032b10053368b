// rss-parser on the same bytes as the Python side of the parse benchmark.
// Usage: node bench.mjs MANIFEST, where MANIFEST is a JSON list of file paths.
// After one warm-up round (JIT, module loading) it prints {"ready": true}; then every line
// read on stdin runs one more round over all files and prints the round's CPU and wall
// seconds and how many documents parsed or failed. The driver interleaves these rounds with
// its own, so a busy machine slows every parser alike. EOF ends it.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import Parser from "rss-parser";

const [manifestPath] = process.argv.slice(2);
const files = JSON.parse(readFileSync(manifestPath, "utf8"));
const bodies = files.map((path) => readFileSync(path));
const parser = new Parser();

async function round() {
  let ok = 0;
  let failed = 0;
  for (const body of bodies) {
    try {
      // What rss-parser's parseURL does with a response: decode it as UTF-8, then parse.
      await parser.parseString(body.toString("utf8"));
      ok += 1;
    } catch {
      failed += 1;
    }
  }
  return { ok, failed };
}

async function measuredRound() {
  const cpuStart = process.cpuUsage();
  const wallStart = process.hrtime.bigint();
  const counts = await round();
  const cpu = process.cpuUsage(cpuStart);
  return {
    cpu_s: (cpu.user + cpu.system) / 1e6,
    wall_s: Number(process.hrtime.bigint() - wallStart) / 1e9,
    ...counts,
  };
}

await round();
process.stdout.write(JSON.stringify({ ready: true }) + "\n");
for await (const _line of createInterface({ input: process.stdin })) {
  process.stdout.write(JSON.stringify(await measuredRound()) + "\n");
}
