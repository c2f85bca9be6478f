// render_faces.mjs: cartoon faces as SVG, one JSON line per face on stdout, from DiceBear's avataaars
// style with every option picked explicitly from a seeded random stream, so each face's labels (skin
// colour, hair style, accessories, ...) are known. train/make_faces.py rasterises and packs them.
//
//   node train/render_faces.mjs --modules DIR --count N [--seed S] [--start I]
//
// DIR is the folder holding node_modules/@dicebear/{core,collection} (npm install there; see
// train/README.md). Face i depends only on (seed, i), so any slice [start, start + count) of a set is
// the same faces whoever renders it. The first line is {"heads": {HEAD: [VALUE, ...]}}, every value each
// label head can take; then one line a face: {"index": i, "labels": {HEAD: VALUE, ...}, "svg": "..."},
// where HEAD is one of LABEL_HEADS below and VALUE one of that head's values ("none" where an optional
// part is left out). DiceBear's own resolved options are compared with the picks, so a choice the
// library ignored or renamed stops the run instead of mislabelling a face.
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

function parseArgs(argv) {
  const args = { modules: null, count: null, seed: 1, start: 0 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in args) || i + 1 >= argv.length) {
      throw new Error(`unknown or incomplete option '${argv[i]}' (--modules DIR --count N [--seed S] [--start I])`);
    }
    args[key] = key === 'modules' ? argv[i + 1] : Number(argv[i + 1]);
  }
  if (!args.modules) throw new Error('--modules DIR is required');
  for (const key of ['count', 'seed', 'start']) {
    if (!Number.isInteger(args[key]) || args[key] < 0) throw new Error(`--${key} expects a whole number >= 0`);
  }
  return args;
}

// splitmix32-style mixing of (seed, index, stream) into a 32-bit state, then mulberry32: small, exact in
// JavaScript's integer arithmetic, and independent of DiceBear's own seeded generator.
function faceRandom(seed, index) {
  let state = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35);
  state = (state ^ (state >>> 16)) >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = (rand, list) => list[Math.floor(rand() * list.length)];

// The heads the quality classifier learns; each is an option of the style (colours as DiceBear's hex).
export const LABEL_HEADS = ['skinColor', 'top', 'hairColor', 'accessories', 'facialHair', 'clothing',
                            'eyes', 'eyebrows', 'mouth'];

// One face's options. Probabilities of the optional parts are 0 or 100, decided here, so DiceBear draws
// nothing itself: top (hair or headwear) on 95 % of faces, accessories (glasses, eyepatch) on 30 %,
// facial hair on 20 %. The background is DiceBear's default blue for every face.
function headValues(schema) {
  const optional = (values) => ['none', ...values];
  return {
    skinColor: schema.skinColor.default,
    top: optional(schema.top.items.enum),
    hairColor: schema.hairColor.default,
    accessories: optional(schema.accessories.items.enum),
    facialHair: optional(schema.facialHair.items.enum),
    clothing: schema.clothing.items.enum,
    eyes: schema.eyes.items.enum,
    eyebrows: schema.eyebrows.items.enum,
    mouth: schema.mouth.items.enum,
  };
}

function chooseOptions(schema, rand) {
  const enums = (key) => schema[key].items.enum;
  const colours = (key) => schema[key].default;
  const labels = {
    skinColor: pick(rand, colours('skinColor')),
    top: rand() < 0.95 ? pick(rand, enums('top')) : 'none',
    hairColor: pick(rand, colours('hairColor')),
    accessories: rand() < 0.30 ? pick(rand, enums('accessories')) : 'none',
    facialHair: rand() < 0.20 ? pick(rand, enums('facialHair')) : 'none',
    clothing: pick(rand, enums('clothing')),
    eyes: pick(rand, enums('eyes')),
    eyebrows: pick(rand, enums('eyebrows')),
    mouth: pick(rand, enums('mouth')),
  };
  const options = {
    skinColor: [labels.skinColor],
    top: labels.top === 'none' ? [] : [labels.top],
    topProbability: labels.top === 'none' ? 0 : 100,
    hairColor: [labels.hairColor],
    hatColor: [pick(rand, colours('hatColor'))],
    accessories: labels.accessories === 'none' ? [] : [labels.accessories],
    accessoriesProbability: labels.accessories === 'none' ? 0 : 100,
    accessoriesColor: [pick(rand, colours('accessoriesColor'))],
    facialHair: labels.facialHair === 'none' ? [] : [labels.facialHair],
    facialHairProbability: labels.facialHair === 'none' ? 0 : 100,
    facialHairColor: [labels.hairColor],
    clothing: [labels.clothing],
    clothesColor: [pick(rand, colours('clothesColor'))],
    clothingGraphic: [pick(rand, enums('clothingGraphic'))],
    eyes: [labels.eyes],
    eyebrows: [labels.eyebrows],
    mouth: [labels.mouth],
    backgroundColor: colours('backgroundColor'),
  };
  return { labels, options };
}

// DiceBear's resolved choices (createAvatar(...).toJson().extra) must be the ones picked.
function checkResolved(index, labels, extra) {
  for (const head of LABEL_HEADS) {
    let got = extra[head];
    if (got === undefined || got === null) got = 'none';
    if (head.endsWith('Color')) got = String(got).replace(/^#/, '');
    if (head === 'hairColor' && labels.top === 'none') continue;  // no hair drawn: colour unused
    if (got !== labels[head]) {
      throw new Error(`face ${index}: DiceBear drew ${head} = '${got}', not the chosen '${labels[head]}'`);
    }
  }
}

async function loadDiceBear(dir) {
  const require = createRequire(resolve(dir) + '/');
  const load = (name) => import(pathToFileURL(require.resolve(name)).href);
  const [core, collection] = await Promise.all([load('@dicebear/core'), load('@dicebear/collection')]);
  return { createAvatar: core.createAvatar, style: collection.avataaars };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { createAvatar, style } = await loadDiceBear(args.modules);
  const schema = style.schema.properties;
  const out = [JSON.stringify({ heads: headValues(schema) })];
  for (let i = args.start; i < args.start + args.count; i++) {
    const { labels, options } = chooseOptions(schema, faceRandom(args.seed, i));
    const avatar = createAvatar(style, { seed: `face-${args.seed}-${i}`, ...options });
    checkResolved(i, labels, avatar.toJson().extra);
    out.push(JSON.stringify({ index: i, labels, svg: avatar.toString() }));
    if (out.length === 256) {
      process.stdout.write(out.join('\n') + '\n');
      out.length = 0;
    }
  }
  if (out.length) process.stdout.write(out.join('\n') + '\n');
}

main().catch((err) => {
  process.stderr.write(`render_faces.mjs: ${err.message}\n`);
  process.exit(1);
});
