// Placeholder: the audit page is written by the pages helper (issue #18); it registers itself with page() from ../router.js.
