// Validates the custom resources validate_manifests.py set aside (a JSON list of
// {where, object}) with the prometheus-operator models of @kubernetes-models, whose
// validators are generated from the operator's CRD schemas. Exits 1 on any problem.
// Usage: node validate_crds.mjs NODE_MODULES_DIR CRDS.json
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, file] = process.argv.slice(2);
const items = JSON.parse(readFileSync(file, "utf8"));
const pkg = join(modules, "@kubernetes-models", "prometheus-operator");
const version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
let problems = 0;
for (const { where, object } of items) {
  const [group, apiVersion] = object.apiVersion.split("/");
  const path = join(pkg, group, apiVersion, `${object.kind}.js`);
  let Model;
  try {
    Model = (await import(pathToFileURL(path).href))[object.kind];
  } catch (e) {
    console.error(`[validate] ${where}: no model for ${object.apiVersion} ${object.kind}`);
    problems++;
    continue;
  }
  try {
    new Model(object).validate();
  } catch (e) {
    console.error(`[validate] ${where}: ${e.message}`);
    problems++;
  }
}
console.error(`[validate] ${items.length} custom resources checked against ` +
  `@kubernetes-models/prometheus-operator ${version}; ${problems} problem(s)`);
process.exit(problems ? 1 : 0);
