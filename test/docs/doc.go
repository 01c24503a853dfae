// Package docs checks the repository's Markdown documents as GitHub shows
// them: every relative link reaches a file of the repository, every #anchor
// a heading of its page, and the README lists every flag the registrar
// accepts. A module of its own, so that the product's go.mod does not carry
// a Markdown parser.
package docs
