// ESLint for the site's JavaScript (tests/test_js_lint.py runs it). ESLint, @eslint/js
// and globals are installed by that test into .cache/eslint, not beside this file, so
// they are resolved from the ESLint that is running (process.argv[1] is its bin/).
import { createRequire } from "node:module";

const require = createRequire(process.argv[1]);
const js = require("@eslint/js");
const globals = require("globals");

export default [
  js.configs.recommended,
  {
    files: ["live/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.browser },
    },
  },
  {
    // KaTeX's start-up script: a classic script using the global `katex`.
    files: ["katex-init.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      // katex, and Material's document$ (the page-change observable)
      globals: { ...globals.browser, katex: "readonly", document$: "readonly" },
    },
  },
  {
    files: ["eslint.config.mjs"],
    languageOptions: { globals: { ...globals.node } },
  },
];
