/** A field's place in an applied document: map keys and list indexes from its root. */
export type Path = (string | number)[];

/** Where in the document a problem shows: at the field's key, at its value, or (for a missing field) at the map that lacks it. */
export type IssueAt = 'key' | 'value' | 'parent';

/** How a rule of one kind of spec tells the validator of a problem it found. */
export type ReportIssue = (path: Path, message: string, at: IssueAt) => void;
