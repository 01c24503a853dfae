// Package docs checks the repository's Markdown documents as GitHub shows
// them: every relative link reaches a file of the repository and every
// #anchor a heading of its page; the README lists every flag the registrar
// accepts and stays within its budget; CONTRIBUTING.md lists every make
// target. A module of its own, so that the product's go.mod does not carry
// a Markdown parser.
package docs
