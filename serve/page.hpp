// page.hpp: the page of GET /: plain HTML and JavaScript, no build step, held in page.cpp.
//
// A person types seeds (or shuffles them) and sees their faces in a grid (GET /v1/images/SEED.png);
// picks two seeds and drags a slider to walk between their faces: the page fetches the two latents
// (GET /v1/latents?seeds=A,B), mixes them along the great circle between them (as --interpolate
// does) and asks for the mixed latent's face (POST /v1/generate with "latents"); and downloads what
// it shows: the grid as one mosaic PNG, the mixed face as a PNG. A link may set the start
// (#seeds=0-15&a=1&b=2&t=50); the face shown carries its PNG's digest and the page counts its errors
// on <body data-problems>, for tests in a headless browser (tests/suites/serve_page.sh).
#pragma once

namespace facegen::serve {

const char* page_html();

}  // namespace facegen::serve
