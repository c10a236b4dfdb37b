// The layout language: how a model's layers are split into pipeline stages.
//
// This grammar is the specification of the language's syntax; docs/layout-language.md explains
// the meaning of each construct and the checks made after parsing (counts, size limits, nesting
// depth, model rules). The C++ parser is generated from this file at build time.
//
// Example: "Et*3|(tt|)*29,m|L" is 32 stages: the embedding and 3 decoder layers, 29 stages of two
// decoder layers, one stage with the MTP layer and one with the loss.
grammar Layout;

@lexer::members {
  // Set when reading a layout file: '#' then starts a comment that runs to the end of the line.
  // In a layout given on the command line '#' is not part of the language.
  bool allowComments = false;
}

// ---------------------------------------------------------------------------------------------
// Parser

// A layout is a sequence of items. Layer symbols are appended to the current stage; '|' ends the
// current stage and starts a new one, so "a|b" is two stages and a trailing '|' leaves an empty
// last stage.
layout
    : item* EOF
    ;

// An item is a layer symbol, a stage separator or a group. A layer symbol or a separator may be
// repeated with "*N"; a group must be.
item
    : layer repeat?         # layerItem
    | BAR repeat?           # separatorItem
    | group repeat          # groupItem
    ;

// A group repeats a whole sub-layout, which may contain stage separators and other groups:
// "(tt|)*3" is "tt|tt|tt|".
group
    : LPAREN item+ RPAREN
    ;

repeat
    : STAR COUNT
    ;

// E, t, m and L are built in; any other ASCII letter is a symbol of the model's own, which the
// compiler accepts only where the model declares it (ppcompile --symbols; docs/layout-language.md).
layer
    : EMBEDDING
    | DECODER
    | MTP
    | LOSS
    | OWN
    ;

// ---------------------------------------------------------------------------------------------
// Lexer

EMBEDDING : 'E' ;
DECODER   : 't' ;   // a transformer (decoder) layer
MTP       : 'm' ;   // a multi-token-prediction layer
LOSS      : 'L' ;   // the output head and loss
// Any other ASCII letter: a layer of the model's own. It comes after the four above, so that
// ANTLR's rule order gives E, t, m and L their own tokens.
OWN       : [A-Za-z] ;

BAR       : '|' ;
LPAREN    : '(' ;
RPAREN    : ')' ;
STAR      : '*' ;

// A repeat count: decimal digits. Commas are cosmetic everywhere, so they may also appear
// between the digits of a count ("1,000" is 1000), as they may in Megatron-LM.
COUNT     : DIGIT (','* DIGIT)* ;

COMMA     : ',' -> skip ;
WS        : [ \t\r\n]+ -> skip ;
// The predicate sits at the right edge so that the lexer's DFA can still cache its start state.
COMMENT   : '#' ~[\r\n]* {allowComments}? -> skip ;

// Anything else is a single unknown character; the compiler reports it by name.
UNKNOWN   : . ;

fragment DIGIT : [0-9] ;
