/**
 * The CLI's configuration parser, for the apply page: loaded by that page when first opened (its own chunk of the
 * build), so that the other pages do not carry the YAML parser.
 */
export { formatSpecError, parseSpecText, specKind } from '../../api/parse.js';
export { parseRepoEntry } from '../../api/mappings.js';
